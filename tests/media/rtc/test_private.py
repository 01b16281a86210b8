"""The shim of aiortc's private parts finds every one it needs, and names the one that is gone."""

import pytest
from aiortc import RTCRtpReceiver

from media.rtc import private


class Holder:
    def __init__(self) -> None:
        self.__kept = 1
        self._plain = 2


def test_every_private_part_this_project_needs_is_there():
    assert private.missing(private.REQUIRED) == []


def test_instance_attributes_are_found_in_the_source_as_python_stores_them():
    assert private.missing([(Holder, "_Holder__kept"), (Holder, "_plain")]) == []
    assert private.missing([(Holder, "__kept"), (Holder, "_Holder__gone")]) == [
        f"{__name__}.Holder.__kept",
        f"{__name__}.Holder._Holder__gone",
    ]


def test_a_missing_part_stops_the_start_naming_it_and_the_version():
    from importlib.metadata import version

    with pytest.raises(private.AiortcChanged) as caught:
        private.check([*private.REQUIRED, (RTCRtpReceiver, "_RTCRtpReceiver__renamed_upstream")])
    message = str(caught.value)
    assert "aiortc.rtcrtpreceiver.RTCRtpReceiver._RTCRtpReceiver__renamed_upstream" in message
    assert f"aiortc {version('aiortc')}" in message
    assert "_RTCRtpReceiver__jitter_buffer" not in message  # only what is gone
