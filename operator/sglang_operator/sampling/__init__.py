"""Per-revision sampling of SGLang servers: typed samples (:mod:`.model`), pure computation from two scrapes
(:mod:`.compute`) and the I/O that scrapes pods (:mod:`.sampler`)."""
