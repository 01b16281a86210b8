"""Each setting has one source: the YAML of the server's profile, or of the profile a session asked for."""

import pytest

from agent.config import CONFIG_DIR, END_SILENCE_MS, EngineConfig, load_config, profile_config
from agent.profiles import Profile


def test_a_sessions_end_of_turn_silence_comes_from_its_profiles_yaml():
    base = load_config(CONFIG_DIR / "default.yaml")
    assert base.session_options()["end_silence_ms"] == END_SILENCE_MS == EngineConfig().end_silence_ms
    translate = profile_config(base, "translate")
    assert translate.session_options()["end_silence_ms"] == 400  # configs/translate.yaml
    assert profile_config(base, "in_car").session_options()["end_silence_ms"] == END_SILENCE_MS
    assert "end_silence_ms" not in Profile.__slots__  # not a second source beside the YAML


def test_only_the_cars_sessions_ask_whisper_for_a_second_opinion_whatever_the_servers_profile():
    """configs/in_car.yaml turns `understanding.second_opinion` on; the default's leaves it off (a turn not acted
    on would wait for Whisper). A session takes its own profile's, on a server of either profile."""
    default, car = load_config(CONFIG_DIR / "default.yaml"), load_config(CONFIG_DIR / "in_car.yaml")
    assert default.session_options()["second_opinion"] is None
    assert car.session_options()["second_opinion"] == (20.0, -0.1)
    assert profile_config(default, "in_car").session_options()["second_opinion"] == (20.0, -0.1)
    assert profile_config(car, "default").session_options()["second_opinion"] is None


def test_off_unquoted_in_yaml_is_the_switch_off_not_a_type_error(tmp_path):
    path = tmp_path / "off.yaml"
    path.write_text("media:\n  echo_cancellation: off\n  jitter_buffer: off\n")  # YAML 1.1: off is false
    media = load_config(path).media
    assert (media.echo_cancellation, media.jitter_buffer) == ("off", "off")
    path.write_text("media:\n  echo_cancellation: on\n")
    assert load_config(path).media.echo_cancellation == "on"
    path.write_text("media:\n  jitter_buffer: on\n")  # not one of its settings: said so
    with pytest.raises(ValueError, match="jitter_buffer must be one of adaptive, off"):
        load_config(path)
