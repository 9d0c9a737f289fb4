"""The ``mlm-suite`` commands, one module each (``pretrain``, ``finetune_ner``, ...: each ``main(argv)`` runs the
command, as transformers' ``run_*.py`` scripts do), and in :mod:`mlm_suite.jobs.common` the parts they share."""
