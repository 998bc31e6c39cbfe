"""Real tables with categorical attributes, encoded as the papers that use them describe.

``bank`` — UCI Bank Marketing (Moro, Cortez & Rita 2014), the data of Stallmann & Wilbik's
Section 3.2.3, read from ``bank/bank-full.csv`` (``;``-separated, strings quoted) under
``data.data_dir``. With ``attributes: paper`` (the default) it is their table: the attributes
age, balance and education, education translated to the years it roughly stands for
(primary 1, secondary 2, tertiary 3), rows with an unknown job or education dropped
(43,193 rows), one client per job (11 groups, ``groups``), the target ``y`` (a term deposit
subscribed: 1) as the label. They standardise every column; a run does the same with
``data.scale: standard`` (the mean and deviation of the union, from summed moments).
``attributes: all`` keeps every attribute but the job: numbers as they are, yes/no as 1/0,
education as above, the month as 1-12, and marital status, contact and the previous
outcome one-hot (a column per value, "unknown" one of them).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fedray.core.errors import ConfigError, DataError
from fedray.data.datasets import DATA_SOURCES, Dataset, DataSource, require_dir

EDUCATION_YEARS = {"primary": 1.0, "secondary": 2.0, "tertiary": 3.0}
MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
BANK_FILES = {"full": "bank-full.csv", "sample": "bank.csv"}
BANK_BINARY = ("default", "housing", "loan")
BANK_ONE_HOT = {"marital": ("divorced", "married", "single"), "contact": ("cellular", "telephone", "unknown"),
                "poutcome": ("failure", "other", "success", "unknown")}
BANK_NUMERIC = ("age", "balance", "day", "duration", "campaign", "pdays", "previous")
BANK_OPTIONS = {
    "attributes": "'paper' (default): age, balance, education (primary 1, secondary 2, tertiary 3), as Stallmann "
                  "& Wilbik; 'all': every attribute but the job (yes/no as 1/0, month 1-12, marital, contact and "
                  "poutcome one-hot)",
    "file": "'full' (default): bank-full.csv, 45,211 rows; 'sample': bank.csv, its 10% sample",
    "nrows": "read only the first NROWS rows of the file (default: all)",
}


def _choice(options: dict[str, Any], key: str, allowed: tuple[str, ...]) -> str:
    value = options.get(key, allowed[0])
    if value not in allowed:
        raise ConfigError(f"data.options.{key}: must be one of {', '.join(map(repr, allowed))}; got {value!r}")
    return str(value)


def _nrows(options: dict[str, Any]) -> int | None:
    n = options.get("nrows")
    if n is not None and (isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1):
        raise ConfigError(f"data.options.nrows: must be a positive integer or null; got {n!r}")
    return None if n is None else int(n)


def _read_bank(path: Path, nrows: int | None) -> Any:
    import pandas as pd

    if not path.is_file():
        raise DataError(f"data.dataset: bank: no file {str(path)!r} (UCI Bank Marketing, bank-full.csv)")
    try:
        df = pd.read_csv(path, sep=";", nrows=nrows)
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"data.dataset: bank: {str(path)!r} is not the ';'-separated Bank Marketing CSV: "
                        f"{' '.join(str(exc).split())[:200]}") from None
    need = ("age", "job", "education", "balance", "y")
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise DataError(f"data.dataset: bank: {str(path)!r} lacks the column(s) {missing} (it has {list(df.columns)})")
    return df


def load_bank(arg: str, ddir: Path | None, options: dict[str, Any]) -> Dataset:
    """UCI Bank Marketing: one client per job, encoded as Stallmann & Wilbik (``attributes: paper``) or whole."""
    attributes = _choice(options, "attributes", ("paper", "all"))
    which = _choice(options, "file", ("full", "sample"))
    root = require_dir(ddir, "bank")
    folder = root / "bank" if (root / "bank" / BANK_FILES[which]).exists() else root
    df = _read_bank(folder / BANK_FILES[which], _nrows(options))
    df = df[(df["job"] != "unknown") & df["education"].isin(list(EDUCATION_YEARS))].reset_index(drop=True)
    if len(df) == 0:
        raise DataError("data.dataset: bank: no row with a known job and education")
    cols: dict[str, np.ndarray] = {"age": df["age"].to_numpy(np.float64), "balance": df["balance"].to_numpy(np.float64),
                                   "education": df["education"].map(EDUCATION_YEARS).to_numpy(np.float64)}
    if attributes == "all":
        cols.update({c: df[c].to_numpy(np.float64) for c in BANK_NUMERIC if c not in cols})
        cols.update({c: (df[c] == "yes").to_numpy(np.float64) for c in BANK_BINARY})
        cols["month"] = df["month"].map({m: i + 1.0 for i, m in enumerate(MONTHS)}).to_numpy(np.float64)
        for c, values in BANK_ONE_HOT.items():
            for v in values:
                cols[f"{c}={v}"] = (df[c] == v).to_numpy(np.float64)
    names = tuple(cols)
    X = np.column_stack([cols[n] for n in names])
    y = (df["y"] == "yes").to_numpy().astype(np.int64)
    groups = df["job"].to_numpy(dtype=object)
    return Dataset(X, y, names, (len(names),), "bank", groups=groups,
                   meta={"class_names": ["no", "yes"], "attributes": attributes, "file": BANK_FILES[which]})


DATA_SOURCES.register("bank", DataSource(
    load_bank, "UCI Bank Marketing (Moro et al. 2014): bank customers, one client per job (11), the attributes "
               "Stallmann & Wilbik cluster (age, balance, education as 1-3) or all of them; label: subscribed",
    "bank/bank-full.csv (or bank/bank.csv with file: sample), ';'-separated",
    "https://archive.ics.uci.edu/dataset/222/bank+marketing (CC BY 4.0)", BANK_OPTIONS,
    defaults={"attributes": "paper", "file": "full", "nrows": None}))
