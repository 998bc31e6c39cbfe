"""A tracking URI's user info and query string are never recorded or shown."""
from __future__ import annotations

import pytest

import fedray
from fedray.api.config import ExperimentConfig
from fedray.api.uris import redact_uri
from fedray.core.errors import ConfigError

URI = "http://alice:s3cret-token@127.0.0.1:9/mlflow?token=q-secret#frag"


def test_redact_uri_drops_user_info_query_and_fragment_only():
    assert redact_uri(URI) == "http://127.0.0.1:9/mlflow"
    assert redact_uri("file:///tmp/mlruns") == "file:///tmp/mlruns"
    assert redact_uri("databricks") == "databricks"


def test_the_recorded_config_holds_no_credentials(tmp_path):
    """config.yaml, summary.json, checkpoints and the MLflow run record the config's plain data
    (ExperimentConfig.to_dict / to_yaml): the URI there is redacted (on today's main it was verbatim)."""
    cfg = ExperimentConfig.model_validate({"output": {"mlflow_tracking_uri": URI}})
    text = cfg.to_yaml() + str(cfg.to_dict())
    assert "s3cret" not in text and "q-secret" not in text and "http://127.0.0.1:9/mlflow" in text
    assert cfg.output.mlflow_tracking_uri == URI  # the run itself still uses the address given


def test_an_unreachable_tracking_uri_is_named_without_its_credentials(tmp_path):
    pytest.importorskip("mlflow")
    with pytest.raises(ConfigError) as err:
        fedray.run(algorithm={"name": "kmeans", "params": {"n_clusters": 2}},
                   data={"dataset": "blobs", "options": {"n_centers": 2, "points_per_client": 10}},
                   federation={"n_clients": 2, "rounds": 1}, runtime={"backend": "local"},
                   output=tmp_path / "out", **{"output.trackers": ["mlflow"], "output.mlflow_tracking_uri": URI})
    assert "s3cret" not in str(err.value) and "q-secret" not in str(err.value) and "alice" not in str(err.value)
