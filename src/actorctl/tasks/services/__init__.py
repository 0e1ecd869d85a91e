"""The services node's actors: the scheduler of delayed tasks, beat, chord barriers,
the event hub."""
