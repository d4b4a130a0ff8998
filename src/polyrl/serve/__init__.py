"""Serve a checkpoint through an OpenAI-compatible chat-completions API (``pip install 'polyrl[serve]'``)."""

from polyrl.serve.app import build_app, serve

__all__ = ["build_app", "serve"]
