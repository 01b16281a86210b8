"""The wire protocols, sans-I/O: `/ws` signalling messages and the OpenAI Realtime events."""
