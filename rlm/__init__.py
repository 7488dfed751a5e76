"""rlm: a Recursive Language Model agent whose working memory is a live IPython kernel."""

__version__ = "0.1.0"
