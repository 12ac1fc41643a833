"""``candle_api.optim``: optimizers on the fused in-place update kernels
(``candle_api.ops.optim``) and learning-rate schedulers, with PyTorch's
constructors and Candle's method names (``backward_step``, ``step(grads)``,
``learning_rate``, ``set_learning_rate``)."""

from . import lr_scheduler
from .adam import Adam
from .adamw import AdamW
from .optimizer import Optimizer
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "lr_scheduler"]
