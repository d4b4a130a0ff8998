"""Agents written against the OpenAI API as rollout harnesses: a local chat-completions endpoint that records
every completion token-exact (:mod:`.endpoint`, :mod:`.ledger`), the task kind (:mod:`.task`) and its rollout
(:mod:`.rollout`). See docs/environments.md, "Your own agent as the harness"."""
