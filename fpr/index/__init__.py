from fpr.index.faiss_index import GalleryIndex, IndexCard, build, library_versions, load, save

__all__ = ["GalleryIndex", "IndexCard", "build", "library_versions", "load", "save"]
