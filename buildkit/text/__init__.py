"""Text for people: removing control characters (sanitize.py), escaping markdown (markdown.py), the terminal's
messages and progress (ui.py, progress.py) and the build timeline chart (timeline.py). May import the base only
(errors.py, files.py)."""
