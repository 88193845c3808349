"""The registered tests need CUDA GPUs: pytest marks each one ``gpu`` (``-m gpu`` selects them, ``-m "not gpu"``
leaves them out). Each skips itself, with the reason, where it cannot run, so they still collect on CPU."""

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.gpu)
