"""Metrics computed from evaluations and inputs: impact and generalized impact (Daylight),
perceptual distances (SSIM, PSNR, LPIPS), Fourier spectra, OOD detection (AUROC, FPR at 95% TPR)
and aggregates across seeds (IQM, bootstrap intervals, P(X > Y)).

May import: victims, common, errors, version."""
