"""The intake/status HTTP API and the human-review desk (``python -m services.api``).

- JSON API (bearer tokens): ``POST /complaints`` publishes ``complaint.received``;
  ``GET /disputes/{id}`` is the audit record of one dispute from PostgreSQL.
- Review desk (reviewer sessions, server-rendered HTML under ``/review``): the queue of what
  needs a human and the decision forms that publish ``review.decided``.

Build the app with :func:`services.api.app.create_app`; nothing here is a module-level client.
"""
