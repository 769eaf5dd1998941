"""The caller side: what runs in the training process (the Evaluator, its request queue, round timers).

It never imports :mod:`simeval.worker` (an import contract checks it): a backend brings
the worker side in, in the worker. ``simeval.Evaluator``, ``simeval.connect`` and
``simeval.RayEvalWorker`` are the public names of what lives here.
"""
