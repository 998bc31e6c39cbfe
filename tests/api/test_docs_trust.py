"""The docs state what fedray does not defend against: a configuration names code that runs, and a
checkpoint's binding to its run folder guards against mix-ups only."""
from __future__ import annotations

from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"


def test_the_docs_say_a_configuration_from_someone_else_is_code():
    text = " ".join(DOCS.read_text().split())
    assert "A configuration from someone else is code." in text
    assert 'algorithm.name: "pkg.mod:Class"' in text and "imports that module and runs it" in text


def test_the_docs_say_the_checkpoint_binding_guards_against_mix_ups_only():
    text = " ".join(DOCS.read_text().split())
    assert "This binding guards against mix-ups only" in text
    assert "the marker it is compared with is a plain file" in text
