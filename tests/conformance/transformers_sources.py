"""transformers' own common model tests, taken from the source distribution of the installed version.

The sdist (``transformers-<version>.tar.gz`` on PyPI) ships ``tests/test_modeling_common.py`` and
``tests/test_configuration_common.py`` but not three modules they import relatively. They are
provided here as stand-ins so the two files import unchanged:

- ``tests/exporters/test_export.py`` (``ExportTesterMixin``, the base of ``ModelTesterMixin``):
  an empty mixin, so its ``torch.export`` tests do not run (export is covered by our own tests).
- ``tests/generation/test_utils.py`` (``GenerationTesterMixin``): an empty mixin; it is only
  used to check that generative models inherit it, and an encoder must not.
- ``tests/utils/test_configuration_utils.py`` (``config_common_kwargs``): a non-default value for
  every attribute of ``PreTrainedConfig``, which ``ConfigTester`` checks a config accepts.

The files are extracted once into the mlm_suite cache (``$MLM_SUITE_CACHE``) and imported as the
package ``transformers_common_tests``; nothing of transformers' test code is kept in this repository.
"""

from __future__ import annotations

import sys
import tarfile
import types
from pathlib import Path

import transformers

from mlm_suite.data import resources

PACKAGE = "transformers_common_tests"

# Non-default values for every public attribute of a transformers 5.x ``PreTrainedConfig``.
CONFIG_COMMON_KWARGS = {
    "return_dict": False,
    "output_hidden_states": True,
    "output_attentions": True,
    "dtype": "float16",
    "chunk_size_feed_forward": 5,
    "architectures": ["BertModel"],
    "id2label": {0: "label"},
    "label2id": {"label": "0"},
    "problem_type": "regression",
}


def _extract_tests(version: str) -> Path:
    """Unpack ``tests/*.py`` of the transformers sdist into the cache; return the folder holding the package."""
    root = resources.cache_dir() / f"transformers-tests-{version}"
    package = root / PACKAGE
    marker = package / ".complete"
    if marker.exists():
        return root
    sdist = resources.fetch_distribution(f"transformers=={version}", sdist=True)
    if f"-{version}.tar.gz" not in sdist.name:
        raise RuntimeError(f"expected the transformers {version} sdist, found {sdist} in the cache")
    prefix = f"transformers-{version}/tests/"
    package.mkdir(parents=True, exist_ok=True)
    with tarfile.open(sdist) as archive:
        for member in archive.getmembers():
            relative = member.name[len(prefix):]
            if member.name.startswith(prefix) and member.isfile() and "/" not in relative and relative.endswith(".py"):
                (package / relative).write_bytes(archive.extractfile(member).read())
    (package / "__init__.py").touch()
    marker.touch()
    return root


def _install_stand_ins() -> None:
    class ExportTesterMixin:
        pass

    class GenerationTesterMixin:
        pass

    stand_ins = {
        "exporters.test_export": {"ExportTesterMixin": ExportTesterMixin},
        "generation.test_utils": {"GenerationTesterMixin": GenerationTesterMixin},
        "utils.test_configuration_utils": {"config_common_kwargs": CONFIG_COMMON_KWARGS},
    }
    for dotted, attributes in stand_ins.items():
        parent, child = dotted.split(".")
        parent_name = f"{PACKAGE}.{parent}"
        if parent_name not in sys.modules:
            parent_module = types.ModuleType(parent_name)
            parent_module.__path__ = []
            sys.modules[parent_name] = parent_module
        module = types.ModuleType(f"{parent_name}.{child}")
        module.__dict__.update(attributes)
        sys.modules[module.__name__] = module


def load() -> tuple[types.ModuleType, types.ModuleType]:
    """Import and return transformers' ``test_modeling_common`` and ``test_configuration_common`` modules."""
    root = _extract_tests(transformers.__version__)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    _install_stand_ins()
    import importlib

    return (
        importlib.import_module(f"{PACKAGE}.test_modeling_common"),
        importlib.import_module(f"{PACKAGE}.test_configuration_common"),
    )
