"""One session pump for every way in (WebRTC over `/ws`, the Realtime protocol over `/v1/realtime`)."""
