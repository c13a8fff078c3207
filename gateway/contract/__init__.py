"""The HTTP contract, declared once: request, answer and error models (msgspec Structs).

The gateway validates with them (shared.model.jobs.EnqueueBody is the enqueue request, for the
scheduler validates a schedule's job with it too) and ``GET /openapi.json``'s components are
generated from them (gateway/contract/schema.py); the client's typed answers are checked
against that document (tests/client/test_models_contract.py).
"""
