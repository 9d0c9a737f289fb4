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

Their pytest marks (``flash_attn_test``, ``accelerate_tests``...) are registered as transformers registers them:
``marks`` reads the ``markers`` of the sdist's ``pyproject.toml`` and adds those of the repository's root
``conftest.py``, which the sdist does not ship (tests/conformance/conftest.py registers them).
"""

from __future__ import annotations

import sys
import tarfile
import types
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest requires tomli before Python 3.11
    import tomli as tomllib

import transformers

from mlm_suite.data.inputs import downloads

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

# The marks transformers' root conftest.py registers (its pytest_configure), copied from that file: the sdist does not
# ship it. A mark the vendored tests use that neither this list nor the sdist's pyproject.toml declares fails their
# collection (strict_markers in our pyproject.toml): copy its line from transformers' conftest.py to here.
CONFTEST_MARKS = [
    "is_pipeline_test: mark test to run only when pipelines are tested",
    "is_staging_test: mark test to run only in the staging environment",
    "accelerate_tests: mark test that require accelerate",
    "not_device_test: mark the tests always running on cpu",
    "torch_compile_test: mark test which tests torch compile functionality",
    "torch_export_test: mark test which tests torch export functionality",
    "flash_attn_test: mark test which tests flash attention functionality",
    "flash_attn_3_test: mark test which tests flash attention 3 functionality",
    "flash_attn_4_test: mark test which tests flash attention 4 functionality",
    "all_flash_attn_test: mark test which tests all mainline flash attentions' functionality",
    "training_ci: mark test for training CI validation",
    "tensor_parallel_ci: mark test for tensor parallel CI validation",
]


def transformers_sdist(version: str) -> Path:
    """The cached sdist of transformers ``version`` (fetched once from the package index)."""
    sdist = downloads.fetch_distribution(f"transformers=={version}", sdist=True)
    if f"-{version}.tar.gz" not in sdist.name:
        raise RuntimeError(f"expected the transformers {version} sdist, found {sdist} in the cache")
    return sdist


def marks() -> list[str]:
    """The ``markers`` lines (``name: description``) transformers' test suite registers, one per mark."""
    version = transformers.__version__
    pyproject = f"transformers-{version}/pyproject.toml"
    sdist = transformers_sdist(version)
    with tarfile.open(sdist) as archive:
        # Iterated, not looked up by name: it sits near the start, and a lookup would first list the whole archive.
        for member in archive:
            if member.name == pyproject:
                declared = tomllib.load(archive.extractfile(member))["tool"]["pytest"]["ini_options"]["markers"]
                break
        else:
            raise RuntimeError(f"{pyproject} is not in {sdist}")
    by_name = {line.partition(":")[0].strip(): line for line in CONFTEST_MARKS + declared}
    return list(by_name.values())


def _extract_tests(version: str) -> Path:
    """Unpack ``tests/*.py`` of the transformers sdist into the cache; return the folder holding the package."""
    root = downloads.cache_dir() / f"transformers-tests-{version}"
    package = root / PACKAGE
    marker = package / ".complete"
    if marker.exists():
        return root
    sdist = transformers_sdist(version)
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
