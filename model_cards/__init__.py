"""Model-card templates, installed as the package data ``mlm_suite.model_cards``."""
