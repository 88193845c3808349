"""The exact greedy draft head over a target LM head, split over tensor-parallel ranks."""
