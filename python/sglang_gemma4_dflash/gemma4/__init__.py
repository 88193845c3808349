"""Gemma 4 target pieces: the DFLASH capture method and the draft-against-target start-up checks."""
