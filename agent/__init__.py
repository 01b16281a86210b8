"""omni-agent: a real-time voice and video agent."""

__version__ = "0.1.0"
