"""One thin adapter per outside thing (NVML, Docker, processes, SGLang HTTP, SGLang's parser,
Compose validator, host). Everything that touches the world goes through one of these."""
