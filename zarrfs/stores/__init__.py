"""Where keys live: the store contract (``base.Store``) and its backends.

Every backend maps a key ("a/0.0", "zarr.json") to bytes, reads by range and
lists by prefix; ``base`` states the contract that tests/support/store_contract.py
runs against each backend, and ``WriteRefusingStore``, the base of the
read-only ones; ``readonly``, the wrapper that makes any store read-only (the offline
commands open stores through it). Backends: ``directory`` (with ``fileio``, openat2 under the
root), ``zipstore`` (with ``zipindex``), ``http`` (with ``httpwire``) and
the object stores over ``objstore`` (with ``objranges``, ``s3_errors``, ``s3_versions``,
``s3_lease``): ``s3`` (with ``s3_config``), ``gcs`` and ``azure`` (with ``cloud_config``);
``checksums``, what travels with values so that changed bytes are caught;
``location`` turns the STORE argument into one of them.
"""
