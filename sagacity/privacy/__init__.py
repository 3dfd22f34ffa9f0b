"""What of an entry a reader may see: the key service and envelope encryption of sealed
fields, redaction at write time, what may leave a service, data withheld or erased."""
