"""`fedray list` and `fedray describe` show each image data set, the files it reads and where its authors
distribute it."""
from __future__ import annotations

import pytest

from fedray.core.errors import ConfigError
from fedray.tools.cli import main
from fedray.tools.describe import describe

SETS = {"femnist": "leaf", "cifar10": "cs.toronto.edu/~kriz/cifar", "emnist:SPLIT": "nist.gov",
        "fashion-mnist": "zalandoresearch/fashion-mnist", "kmnist": "rois-codh/kmnist", "k49": "rois-codh/kmnist",
        "images:FOLDER": "Pillow"}


def test_list_shows_files_and_source_of_every_image_set(capsys):
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for name, source in SETS.items():
        at = lines.index(f"  {name}")
        assert lines[at + 1].strip().startswith("files: ") and source in lines[at + 2], name


@pytest.mark.parametrize("name", [*SETS, "emnist:byclass"])
def test_describe_names_files_source_and_options(name):
    text = describe(name)
    assert name in text.splitlines()[0] and "files under data.data_dir:" in text and "distributed by:" in text
    assert SETS.get(name, "nist.gov") in text


def test_describe_shows_the_options_with_their_defaults():
    text = describe("cifar10")
    assert "data.options.format" in text and "'auto'" in text and "data.options.part" in text
    assert "data.options.classes" in describe("femnist") and "letters" in describe("femnist")
    with pytest.raises(ConfigError, match="unknown EMNIST split 'nope'"):
        describe("emnist:nope")
