"""Serve a checkpoint through an OpenAI-compatible chat-completions API (``pip install 'polyrl[serve]'``)."""

from polyrl.serve.limits import ServeLimits

__all__ = ["ServeLimits", "build_app", "serve"]


def __getattr__(name: str):
    # the app needs torch; the CLI reads ServeLimits for its options without importing it
    if name in ("build_app", "serve"):
        from polyrl.serve import app

        return getattr(app, name)
    raise AttributeError(f"module 'polyrl.serve' has no attribute {name!r}")
