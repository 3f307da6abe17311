"""Text for people: removing control characters (sanitize.py), escaping markdown (markdown.py), the terminal's
messages and progress (ui.py, progress.py), the build timeline chart (timeline.py) and the Jinja2 templates' one
environment (templates.py). May import the base only (errors.py, files.py)."""
