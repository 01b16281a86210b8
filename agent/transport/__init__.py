"""The ways in: an aiortc peer signalled over `/ws`, and the OpenAI Realtime protocol over `/v1/realtime`.

Both are `Connection`s: admitted by the server above (`Host`), each runs one
`SessionPump` and writes its messages in its own protocol.
"""
