"""Training with the HF ``Trainer``: the jobs' ``Trainer`` subclasses and callbacks, and what they write.

* :mod:`~mlm_suite.training.trainer`: ``JobTrainer`` (loss normalisation, sampling, pickle-free checkpoints);
* :mod:`~mlm_suite.training.controls`: a wall-clock budget (linear or warmup-stable-decay), early stopping, the
  steady step rate;
* :mod:`~mlm_suite.training.schedules`: the training loader of scheduled rows (masking-rate schedules, batch-size
  warmup; ``mlm-suite pretrain``);
* :mod:`~mlm_suite.training.pretraining`: the pretraining job's ``Trainer``, its masking collators and final evaluation;
* :mod:`~mlm_suite.training.freezing`: freezing the encoder of a fine-tuning model;
* :mod:`~mlm_suite.training.retrieval`: the bi-encoder's batches, gradient caching and sentence-transformers files.

The model cards the jobs write (through ``JobTrainer``) live in :mod:`mlm_suite.cards`.
"""
