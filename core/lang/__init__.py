"""The playbook's languages: the expression compiler and evaluator, the sandboxed Jinja
templates (speech and tool), and the spoken filters both template kinds share. Imports nothing
else of the engine but ``errors``."""
