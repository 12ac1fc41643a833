"""Every op of the table, every dtype, every layout, against NumPy; and every
differentiable op's backward pass against finite differences in float64,
with its inputs in every layout."""

from candle_api.testing.conformance import table_tests

# An op the device lacks is reported by the pytest plugin as a missing kernel (a skip, or a failure
# with --candle-strict).
test_op, test_gradient = table_tests()
