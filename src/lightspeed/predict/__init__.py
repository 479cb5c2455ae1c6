"""What-if predictions: pure functions `Profile × change → Profile`, so a prediction is
analysed, reported and compared exactly as a measurement is. No change is the identity.

`predict.whatif.predict` composes them: the changes the step's shapes show (batch size,
autocast precision, checkpointed modules) together, by one run of the changed step on
fake tensors (`predict.shapes`, whose times come from `predict.carry`); then other
hardware (`predict.hardware`); then N-way data parallelism (`predict.data_parallel`).
The modules that run the step (`predict.shapes`, `predict.whatif`) need torch; the
others work on a saved profile alone.
"""
