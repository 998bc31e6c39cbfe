"""Data sources, partitions and federations."""
from fedray.data.datasets import (
    DATA_SOURCES,
    Dataset,
    DataSource,
    available_datasets,
    load_dataset,
    register_data_source,
    resolve_data_dir,
)
from fedray.data.federation import ClientSpec, Federation, build_federation, materialize
from fedray.data.partitions import available_partitions, partition_indices

__all__ = [
    "ClientSpec",
    "Dataset",
    "Federation",
    "DATA_SOURCES",
    "DataSource",
    "available_datasets",
    "register_data_source",
    "available_partitions",
    "build_federation",
    "load_dataset",
    "materialize",
    "partition_indices",
    "resolve_data_dir",
]
