"""The jobs' inputs: files and Hub datasets read into rows (:mod:`~mlm_suite.data.inputs.readers`, every file opened
by :mod:`~mlm_suite.data.inputs.text_files`), the built-in datasets the jobs read without data flags
(:mod:`~mlm_suite.data.inputs.builtin`) and the package-registry downloads they come from
(:mod:`~mlm_suite.data.inputs.downloads`).

Nothing is re-exported here: the downloads are imported by light modules (the model conversion, the WordNet reader)
that need none of the readers' dependencies.
"""
