"""Container images for cpukern: Dockerfile args from the matrix, builds through the
Docker engine, local Debian bases from debootstrap, and buildx bake files.

Modules import the docker SDK lazily: isa_args, install and requirements run
inside a bare build container with the standard library only."""
