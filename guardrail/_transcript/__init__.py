"""Message shapes: OpenAI chat completions, OpenAI Responses items, Anthropic messages.

Nobody owns the shapes a conversation is written in: the check's re-prompts,
compaction, the replay and every adapter read and write them through here.

- :mod:`~guardrail._transcript.chat_to_anthropic`: chat-completions messages
  and function tools in Anthropic's shape, for a request to its API.
- :mod:`~guardrail._transcript.messages`: any of the three shapes read into one
  neutral transcript (calls paired with their results) and written back.
- :mod:`~guardrail._transcript.content`: every string of a message's content,
  walked, mapped or collected, however it nests.
- :mod:`~guardrail._transcript.result_text`: what a result's text says of itself:
  a refusal, a failure guardrail wrote, a server's seal.
- :mod:`~guardrail._transcript.failures`: the flags and sentences by which each
  runtime says a call failed.

Imports: :mod:`guardrail.errors`, the argument parser of
:mod:`guardrail._declare`, and its own modules (``chat_to_anthropic`` reads
``messages``, which reads ``content``, ``failures`` and ``result_text``).
"""
