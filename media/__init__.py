"""Media and time: the clock, PCM conversion, the aligner, rings, the output framer."""
