"""Record value formats at run time: one module per format, and :mod:`spark_jobs.formats.registry` (name -> format).

Each format (:class:`spark_jobs.formats.base.ValueFormat`) turns a record value
into the JSON text the field rules (:mod:`spark_jobs.silver_rules`) read, with
the reason a value is unreadable; what it needs (a value schema, a schema file
or a registry) is its entry in :mod:`include.contract.value_formats`. The run's
schemas (the reader schema, each writer schema id a batch carries) are
:mod:`spark_jobs.formats.schemas`; the Confluent wire format's header, shared by
the registry formats, is :mod:`spark_jobs.formats.framing`.
"""
