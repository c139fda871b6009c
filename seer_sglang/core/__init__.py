"""The pure core of the rollout: samples and groups, the request buffer, the scheduling policies and
what they price (migration, pool transfers), and the accounting of a rollout.

No I/O and no SGLang: the frontend's engine and the simulator drive the same objects.
"""
