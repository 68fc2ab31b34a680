"""Gallery sources (manifests, folders, datasets, the built-in world) and curation."""
from fpr.galleries.records import GalleryItem, ImageRecord

__all__ = ["GalleryItem", "ImageRecord"]
