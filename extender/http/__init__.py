"""The HTTP edge: the app, the scheduler, agent and audit routes, the admission webhook,
identities (shared token, TokenReview), TLS listeners by audience and body limits.

Routes decode a request, call the scheduling service once, and encode its answer.
"""
