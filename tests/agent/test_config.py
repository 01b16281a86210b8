"""Each setting has one source: the YAML of the server's profile, or of the profile a session asked for."""

from agent.config import CONFIG_DIR, END_SILENCE_MS, EngineConfig, load_config, profile_config
from agent.profiles import Profile


def test_a_sessions_end_of_turn_silence_comes_from_its_profiles_yaml():
    base = load_config(CONFIG_DIR / "default.yaml")
    assert base.session_options()["end_silence_ms"] == END_SILENCE_MS == EngineConfig().end_silence_ms
    translate = profile_config(base, "translate")
    assert translate.session_options()["end_silence_ms"] == 400  # configs/translate.yaml
    assert profile_config(base, "in_car").session_options()["end_silence_ms"] == END_SILENCE_MS
    assert "end_silence_ms" not in Profile.__slots__  # not a second source beside the YAML
