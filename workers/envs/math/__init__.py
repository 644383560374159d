"""`benchmark=math`: competition mathematics (Hendrycks et al., 2021) and MATH-500."""
