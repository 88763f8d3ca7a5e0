"""zarrfs: mount Zarr stores as flat array.raw / array.npy files."""

__version__ = "0.3.0"
