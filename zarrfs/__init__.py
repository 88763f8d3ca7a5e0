"""zarrfs: mount Zarr stores as flat array.raw / array.npy files."""

__version__ = "0.1.0"
