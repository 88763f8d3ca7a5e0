"""The metadata documents of every Zarr format (pure parsing and writing).

- ``jsontext``: JSON read in bounded depth and size, written as zarr-python does;
- ``dtypes`` and ``v3_dtypes``: data types and fill values;
- ``legacy``, ``v2``, ``v3``: one parser per format, each to ``formats.model``;
- ``consolidated``: one document that describes a whole hierarchy;
- ``detect``: which format a store directory holds;
- ``hierarchy``: the single entry point the tree lists a store through;
- ``resize``: the documents a resize rewrites;
- ``describe``: what ``info`` and ``user.zarr.*`` say beyond the model's fields.
"""
