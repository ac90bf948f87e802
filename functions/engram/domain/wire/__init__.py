"""The wire formats Engram speaks and translates between (pure: no I/O, no SDK, no settings).

- ``content``: the text of a message's content, a tool call's arguments (one reading for every wire).
- ``usage``: token usage read from each provider's answer (``TokenUsage``) and written in each wire.
- ``sse``: server-sent-events parsing and framing.
- ``anthropic`` / ``anthropic_stream``: OpenAI chat completions <-> Anthropic Messages (requests,
  whole responses, streams).
- ``converse``: OpenAI chat completions <-> Bedrock Converse / ConverseStream, and Engram's own model
  calls as Converse requests.
- ``cache_markers``: where Claude prompt-cache markers go, written as Anthropic ``cache_control`` or
  Converse ``cachePoint``.
- ``shapes``: the JSON shapes the gateway reads (client requests, upstream answers) and their checks.

The chat gateway (``services/chat/gateway.py``) and the model adapters (``adapters/llm/``) both use these, so
the package sits in the domain layer (docs/ARCHITECTURE.md, "Layers"): the adapters keep only I/O.
"""
