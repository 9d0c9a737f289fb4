"""Training with the HF ``Trainer``: the jobs' ``Trainer`` subclasses and callbacks, and what they write.

* :mod:`~mlm_suite.training.trainer`: ``JobTrainer``, the jobs' Trainer, composed of one mix-in per concern:
  :mod:`~mlm_suite.training.checkpoint_format` (pickle-free checkpoints), :mod:`~mlm_suite.training.resuming`
  (resuming only whole checkpoints that fit), :mod:`~mlm_suite.training.loss_accounting` (loss normalisation, empty
  steps, the non-finite watch), :mod:`~mlm_suite.training.stream_position` (``--streaming``),
  :mod:`~mlm_suite.training.throughput` (tokens per second, MFU) and :mod:`~mlm_suite.training.job_outputs`
  (results, kept predictions, the model card);
* :mod:`~mlm_suite.training.controls`: a wall-clock budget (linear or warmup-stable-decay), early stopping, the
  steady step rate;
* :mod:`~mlm_suite.training.schedules`: the training loader of scheduled rows (masking-rate schedules, batch-size
  warmup; ``mlm-suite pretrain``);
* :mod:`~mlm_suite.training.pretraining`: the pretraining job's ``Trainer``, its masking collators and final evaluation;
* :mod:`~mlm_suite.training.freezing`: freezing the encoder of a fine-tuning model;
* :mod:`~mlm_suite.training.retrieval`: the bi-encoder's batches, gradient caching and sentence-transformers files.

The model cards the jobs write (through ``JobTrainer``) live in :mod:`mlm_suite.cards`.
"""
