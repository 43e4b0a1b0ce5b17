"""What the service keeps: the tables (``orm``), the store over them (``store``; the schema's
migrations live in ``scheduler/service/migrations``), the lock that keeps one service per
database (``datalock``) and the purge of old history (``retention``)."""
