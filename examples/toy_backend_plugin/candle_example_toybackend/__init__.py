"""An example candle-api backend plugin: the ``toy`` device type.

    import candle_api as c

    x = c.Tensor([[1.0, 2.0], [3.0, 4.0]], device="toy")
    print((x @ x).softmax(-1).to_device("cpu"))
"""
