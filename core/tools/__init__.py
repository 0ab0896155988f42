"""Playbook tools: HTTP and python tools, pipelines of them, and the SSRF guard with the
shared pinned HTTP client. Tools return events; only the runtime appends them."""
