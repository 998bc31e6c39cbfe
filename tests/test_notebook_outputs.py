"""Committed notebook outputs are clean: what a reader sees holds no colour codes, no absolute
paths of the machine that executed it, and no Python warning lines (which carry such paths)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
ANSI = re.compile(r"\x1b\[")
ABS_PATH = re.compile(r"(?<![\w.])/(home|root|work|tmp|Users|usr|opt|var)/")
PY_WARNING = re.compile(r"\.py:\d+: \w*Warning")


def _texts(nb: dict) -> list[str]:
    out = []
    for cell in nb["cells"]:
        for o in cell.get("outputs", []):
            if "text" in o:
                out.append("".join(o["text"]))
            for kind in ("text/plain", "text/html"):
                if kind in o.get("data", {}):
                    out.append("".join(o["data"][kind]))
    return out


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_outputs_have_no_colour_codes_paths_or_python_warnings(path):
    texts = _texts(json.loads(path.read_text()))
    assert not [t for t in texts if ANSI.search(t)], "ANSI colour codes in outputs"
    assert not [t for t in texts if ABS_PATH.search(t)], "absolute paths in outputs"
    assert not [t for t in texts if PY_WARNING.search(t)], "Python warning lines in outputs"


def test_scaling_study_reaches_10000_clients_and_records_the_load():
    nb = json.loads((NOTEBOOKS[0].parent / "scaling_study.ipynb").read_text())
    text = "\n".join(_texts(nb))
    assert "load average" in text
    assert re.search(r"\b10000\s+ray\b", text) and re.search(r"\b10000\s+local\b", text)
