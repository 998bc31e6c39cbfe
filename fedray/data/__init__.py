"""Data sources, partitions and federations."""
from fedray.data.datasets import (
    Dataset,
    available_datasets,
    load_dataset,
    resolve_data_dir,
)
from fedray.data.federation import ClientSpec, Federation, build_federation, materialize
from fedray.data.partitions import available_partitions, partition_indices

__all__ = [
    "ClientSpec",
    "Dataset",
    "Federation",
    "available_datasets",
    "available_partitions",
    "build_federation",
    "load_dataset",
    "materialize",
    "partition_indices",
    "resolve_data_dir",
]
