"""What the commands of :mod:`mlm_suite.jobs` share: their flags (:mod:`.arguments`, :mod:`.pretraining_arguments`),
the table of commands (:mod:`.commands`), running one from the command line (:mod:`.running`), its output folder
(:mod:`.output_folder`) and the checkpoint it continues (:mod:`.checkpoints`), the model it starts from
(:mod:`.model_loading`), the pretraining plan (:mod:`.pretraining_plan`), and the fine-tuning jobs' training and
sequence-classification parts (:mod:`.finetune_training`, :mod:`.sequence_classification`).
"""
