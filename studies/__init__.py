"""The studies beside the library (studies/README.md): learning grids, credit fidelity and the
junction-maze comparisons, run as ``python -m studies.<name>``; ``studies.runner`` runs their cells."""
